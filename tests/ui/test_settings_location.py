"""Where the settings live: the user config directory, with one left in the data
directory (where earlier versions kept it) moved there once."""

from __future__ import annotations

from halo_weave import settings as settings_mod
from halo_weave.settings import Settings
from halo_weave.ui.main_window import app_qsettings
from halo_weave.ui.settings_io import load_settings, save_settings


def _platform_dirs(monkeypatch, tmp_path):
    for var in ("HALO_WEAVE_HOME", "HALO_WEAVE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "data" / "halo-weave", tmp_path / "config" / "halo-weave"


def test_settings_saved_by_an_earlier_version_move_to_the_config_directory(monkeypatch, tmp_path, qapp):
    data, config = _platform_dirs(monkeypatch, tmp_path)
    data.mkdir(parents=True)
    save_settings(Settings.of(server_url="http://192.0.2.7:5001"), app_qsettings(data))  # where they were

    assert load_settings(app_qsettings()).server.server_url == "http://192.0.2.7:5001"
    assert settings_mod.settings_file() == config / "settings.ini"
    assert (config / "settings.ini").is_file() and not (data / "settings.ini").exists()

    # Once only: a stray file in the data directory never replaces the settings in use.
    save_settings(Settings.of(server_url="http://192.0.2.8:5001"), app_qsettings(data))
    assert load_settings(app_qsettings()).server.server_url == "http://192.0.2.7:5001"


def test_new_settings_go_to_the_config_directory_or_halo_weave_config(monkeypatch, tmp_path, qapp):
    data, config = _platform_dirs(monkeypatch, tmp_path)
    save_settings(Settings.of(server_url="http://192.0.2.9:5001"), app_qsettings())
    assert (config / "settings.ini").is_file() and not (data / "settings.ini").exists()

    monkeypatch.setenv("HALO_WEAVE_CONFIG", str(tmp_path / "mine"))
    save_settings(Settings(), app_qsettings())
    assert (tmp_path / "mine" / "settings.ini").is_file()
