"""Environment report: torch, CUDA, GPU and what this liger_cpp build contains.

Run ``python -m liger_cpp.env``.
"""

import platform


def build_info() -> dict:
    """The facts compiled into liger_cpp._C: {'cuda': 'yes'|'no', 'cuda_archs': ..., ...}."""
    import torch

    import liger_cpp  # noqa: F401

    info = {}
    for line in torch.ops.liger.build_info().splitlines():
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    return info


def has_cuda_kernels() -> bool:
    return build_info().get("cuda") == "yes"


def env_report() -> str:
    """A printable report of the runtime and the build."""
    import torch

    import liger_cpp

    lines = [
        f"liger_cpp {liger_cpp.__version__}",
        f"python {platform.python_version()} on {platform.machine()}",
        f"torch {torch.__version__} (CUDA {torch.version.cuda})",
    ]
    b = build_info()
    lines.append(f"build: cuda kernels {b.get('cuda')}; archs: {b.get('cuda_archs') or '-'}")
    lines.append(f"build note: {b.get('note')}")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            lines.append(
                f"gpu {i}: {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
                f"{p.total_memory / 2**30:.0f} GiB"
            )
    else:
        lines.append("gpu: none visible")
    return "\n".join(lines)


if __name__ == "__main__":
    print(env_report())
