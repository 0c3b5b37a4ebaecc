"""``--gpu-layers N``: the llama.cpp engine's layers on a GPU, for a llama-cpp-python built
with CUDA, Metal or Vulkan.  Tested on the CPU build up to the device: the option and the
setting reach the server's command line, 0 layers is the CPU path exactly as before, a
request for layers on a build without a GPU backend runs on the CPU and says so, and the
KV surgery reads and writes the key cache through ggml's backend API (the path a GPU's
device memory takes) with the same result as through host memory."""

from __future__ import annotations

import subprocess
import sys

import httpx
import numpy as np
import pytest

from halo_weave.server.__main__ import build_parser
from halo_weave.settings import Settings

needs_llama = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import llama_cpp"], capture_output=True).returncode != 0,
    reason="llama-cpp-python is not installed")

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
STORY = ("The lighthouse keeper of Port Quillan kept a logbook of every ship that passed, "
         "the weather at dawn and dusk, and the colour of the sea. ")
OTHER = "My sister Ana moved to Lisbon last spring and opened a small bakery near the river. "


def _gpu_build() -> bool:
    import llama_cpp.llama_cpp as llama

    from halo_weave.server.llamacpp.offload import supports_gpu

    return supports_gpu(llama)


# ------------------------------------------------------------------ the option and the setting

def test_the_server_takes_gpu_layers_and_defaults_to_the_cpu_alone():
    parser = build_parser()
    assert parser.parse_args([]).gpu_layers == 0
    assert parser.parse_args(["--gpu-layers", "12"]).gpu_layers == 12
    assert parser.parse_args(["--gpu-layers", "-1"]).gpu_layers == -1  # every layer


@pytest.mark.parametrize("value", ["-2", "many", "1.5"])
def test_a_bad_layer_count_is_refused_with_a_clear_error(value, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--gpu-layers", value])
    assert exc.value.code == 2
    assert "--gpu-layers" in capsys.readouterr().err


def test_the_setting_reaches_the_built_in_servers_command_line_only_when_set():
    assert "--gpu-layers" not in Settings().server_args()  # 0: the command line of before
    args = Settings.of(server_gpu_layers=20).server_args()
    assert args[args.index("--gpu-layers") + 1] == "20"
    args = Settings.of(server_gpu_layers=-1).server_args()
    assert args[args.index("--gpu-layers") + 1] == "-1"
    assert build_parser().parse_args(args).gpu_layers == -1  # the server reads what the app writes


def test_the_setting_is_saved_and_read_back(tmp_path):
    pytest.importorskip("PySide6")
    from PySide6.QtCore import QSettings

    from halo_weave.ui.settings_io import load_settings, save_settings, settings_problems

    store = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    save_settings(Settings.of(server_gpu_layers=33), store)
    store.sync()
    again = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    assert load_settings(again).server.server_gpu_layers == 33
    assert settings_problems(Settings.of(server_gpu_layers=-3))  # below "all": refused


# ------------------------------------------------------------------ the engine on the CPU build

@needs_llama
def test_zero_layers_loads_the_model_on_the_cpu_as_before():
    import llama_cpp.llama_cpp as llama

    from halo_weave.server.llamacpp import offload, safety

    found = offload.resolve(llama, 0)
    assert found == offload.Offload(0, 0) and found.note is None and found.device(24) == "cpu"
    assert safety.apply(llama.llama_model_default_params(), safety.DEFAULT).n_gpu_layers == 0
    assert safety.apply(llama.llama_model_default_params(), safety.DEFAULT, 7).n_gpu_layers == 7


@needs_llama
def test_layers_asked_of_a_cpu_only_build_run_on_the_cpu_and_say_how_to_rebuild():
    import llama_cpp.llama_cpp as llama

    from halo_weave.server.llamacpp import offload

    if _gpu_build():
        assert offload.resolve(llama, 8) == offload.Offload(8, 8)
        return
    found = offload.resolve(llama, 8)
    assert found.layers == 0 and found.asked == 8
    assert "built for the CPU only" in found.note and "GGML_CUDA" in found.note


def test_the_llamacpp_engine_points_from_device_cuda_to_gpu_layers():
    from halo_weave.server.engine_choice import load_engine

    with pytest.raises(ValueError, match="--gpu-layers"):
        load_engine("llamacpp", "smollm2", device="cuda")


@needs_llama
def test_a_server_asked_for_gpu_layers_on_a_cpu_build_starts_answers_and_says_so(tmp_path):
    from halo_weave.server.launcher import start_server

    if _gpu_build():
        pytest.skip("this llama-cpp-python has a GPU backend: the CPU-only message does not apply")
    process = start_server(port=0, extra_args=["--model", "smollm2", "--gpu-layers", "4", "--threads", "2",
                                               "--kv-dir", str(tmp_path)])
    try:
        process.wait_ready(timeout=300)
        info = httpx.get(f"{process.url}/api/v1/model", timeout=30).json()
        assert info["device"] == "cpu"
        assert "built for the CPU only" in info["engine_note"]  # the window shows it beside the model
        assert any("built for the CPU only" in line for line in process.log)  # and the log
        from halo_weave.kobold_client import KoboldClient

        with KoboldClient(process.url) as client:
            client.model_info()
            ids = [i for i, _ in client.tokenize(CHAT.format("Name a colour."), parse_special=True)]
            tokens = list(client.stream(input_ids=ids, max_length=3, temperature=0, output_attentions=True,
                                        stop_sequence=[]))
        assert tokens and any(t.attention is not None for t in tokens)  # the heatmap still lights
    finally:
        process.stop()


# ------------------------------------------------------------------ the key cache through the backend API

@needs_llama
def test_resurrection_through_the_backend_api_restores_as_through_host_memory(monkeypatch):
    """Where layer 0 runs on a GPU, its key cache is not host memory: the span restore copies
    it out and writes its zeroed rows back through ggml's backend API.  Forced here on the CPU
    build, a pruned span comes back from the store (nothing run) and the model's next token
    and attention are those of the host path."""
    from halo_weave.server import loader
    from halo_weave.server.llamacpp.engine import LlamaEngine
    from halo_weave.server.llamacpp.states import HOST_VIEW_ENV

    source = loader.resolve("smollm2")

    def run(host_view: bool):
        monkeypatch.setenv(HOST_VIEW_ENV, "1" if host_view else "0")
        engine = LlamaEngine(source.path / source.gguf_file, threads=2)
        try:
            head = engine.encode(CHAT.format(STORY * 3), parse_special=True)
            span = engine.encode(" ".join(f"Ship {k} ({(k * 7919) % 65536:04x}) passed at dawn." for k in range(12)))
            tail = engine.encode(CHAT.format(OTHER * 2), parse_special=True)
            turn = engine.encode(CHAT.format("Which ship passed first?"), parse_special=True)
            engine.prepare(head + span + tail)
            pruned = engine.prepare(head + tail + turn)  # the span pruned: its states stored
            back = engine.prepare(head + span + tail + turn)  # and brought back
            logits, row = engine.kv.step([turn[-1]], attention=True)
            return pruned["kv"], back["kv"], logits, row
        finally:
            engine.close()

    pruned, back, logits, row = run(host_view=False)
    assert pruned["stored"] > 0, pruned
    assert back["restored"] == pruned["stored"] and back["inserted"] == 0, back  # put back, not run
    _, _, want_logits, want_row = run(host_view=True)
    assert int(np.argmax(logits)) == int(np.argmax(want_logits))
    assert float(np.abs(logits - want_logits).max()) == 0.0  # the same cells, the same states
    np.testing.assert_array_equal(row, want_row)
