"""JAX's persistent compilation cache in the user cache folder: moved, turned off, or
unusable and said so once."""

import pytest


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


def test_a_cache_folder_that_cannot_be_made_is_one_warning_and_no_cache(
    tmp_path, real_data, monkeypatch
):
    """A regular file where the cache folder should be (or no permission): the run
    compiles without a cache, and the command line says so in one line, not JAX's
    warning with its source line."""
    import warnings

    import jax

    import eqx_fmnist as ef
    import eqx_fmnist.cli.command as cli

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    before = jax.config.jax_compilation_cache_dir
    with pytest.warns(UserWarning, match=f"the compilation cache {blocked} cannot be used"):
        ef.enable_compile_cache(blocked)
    assert jax.config.jax_compilation_cache_dir == before
    # At the command line: the warning as the command prints it, in one line.
    monkeypatch.setenv("EQX_FMNIST_COMPILE_CACHE", str(blocked))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        formats = []
        real_warn = warnings.warn

        def shown(message, *args, **kwargs):  # as the command formats it, while it runs
            formats.append(warnings.formatwarning(message, UserWarning, "f.py", 1))
            real_warn(message, *args, **kwargs)

        monkeypatch.setattr(warnings, "warn", shown)
        assert cli.main(["data", "--data-dir", str(real_data.source)]) == 0
    assert [str(w.message) for w in caught if "compilation cache" in str(w.message)]
    assert len(formats) == 1 and formats[0].startswith("eqx-fmnist: warning: the compilation")
    assert formats[0].count("\n") == 1
    assert jax.config.jax_compilation_cache_dir == before
