"""What the machine's CPU is and can do: `/proc/cpuinfo` read, and the warning a
low-precision policy gets where the CPU cannot multiply in it."""

import jax


def test_cpu_info_reads_the_model_and_flags_of_the_first_cpu(tmp_path):
    from eqx_fmnist.hardware import cpu_info

    path = tmp_path / "cpuinfo"
    path.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu avx2 fma\n\n"
        "processor\t: 1\nmodel name\t: other\nflags\t\t: sse\n"
    )
    assert cpu_info(path) == ("AMD EPYC 7B13", frozenset({"fpu", "avx2", "fma"}))
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert cpu_info(arm) == ("", frozenset({"fp", "asimd", "bf16"}))
    assert cpu_info(tmp_path / "missing") is None


def test_a_low_precision_policy_warns_once_where_the_cpu_cannot_multiply_in_it(monkeypatch):
    """bfloat16 on a CPU without bfloat16 instructions (the flags faked here), and
    float16 on any CPU: one `SlowPrecisionWarning` per dtype and process; float32, and
    bfloat16 where the flags are there, never."""
    import warnings

    import eqx_fmnist as ef
    from eqx_fmnist import hardware

    def init(spec):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ef.init_state(ef.TrainConfig(precision=spec, batch_size=64), 1024)
        return [w for w in seen if issubclass(w.category, hardware.SlowPrecisionWarning)]

    monkeypatch.setattr(hardware, "_warned", set())
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx2", "fma", "avx512f"})
    assert init("float32") == []
    if jax.default_backend() != "cpu":  # an accelerator multiplies in both: no warning
        assert init("p=f32,c=bf16,o=f32") == init("p=f32,c=f16,o=f32") == []
        return
    (said,) = init("p=f32,c=bf16,o=f32")
    assert "p=f32,c=bf16,o=f32" in str(said.message) and "avx512_bf16" in str(said.message)
    assert said.filename == __file__  # the line that asked for it, not Equinox's or JAX's
    assert init("p=f32,c=bf16,o=f32") == []  # once
    assert len(init("p=f32,c=f16,o=f32")) == 1  # float16 has its own
    monkeypatch.setattr(hardware, "_warned", set())
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx2", "avx512_bf16"})
    assert init("p=f32,c=bf16,o=f32") == []
    monkeypatch.setattr(hardware, "cpu_flags", lambda: None)  # not Linux: cannot say
    assert init("p=f32,c=f16,o=f32") == []
