"""JAX's persistent compilation cache in the user cache folder: moved, turned off."""


def test_the_compile_cache_can_be_moved_or_turned_off(monkeypatch, real_data):
    import eqx_fmnist.cli.command as cli

    monkeypatch.setenv("EQX_FMNIST_COMPILE_CACHE", "off")
    assert cli.compile_cache_dir() is None
    monkeypatch.setenv("EQX_FMNIST_COMPILE_CACHE", "~/somewhere")
    assert str(cli.compile_cache_dir()).endswith("somewhere") and "~" not in str(
        cli.compile_cache_dir()
    )
    monkeypatch.delenv("EQX_FMNIST_COMPILE_CACHE")
    assert cli.compile_cache_dir().parts[-2:] == ("eqx_fmnist", "jax-compile")
    enabled = []
    monkeypatch.setattr(cli, "enable_compile_cache", enabled.append)  # as cli sees it
    assert cli.main(["--no-compile-cache", "data", "--data-dir", str(real_data.source)]) == 0
    assert cli.main(["data", "--data-dir", str(real_data.source)]) == 0
    assert enabled == [cli.compile_cache_dir()]  # only the second call turned it on
