"""The ``pocketllm`` console command: runs the bundled C binary (the same
CLI as the project's build), replacing this Python process."""
from __future__ import annotations

import os
import sys

from .errors import LibraryNotFoundError
from .native import find_cli, use_cuda_module


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        exe = find_cli()
    except LibraryNotFoundError as e:
        print(f"pocketllm: {e}", file=sys.stderr)
        return 127
    # The binary inherits the environment: PL_CUDA_MODULE when pocketllm-cuda
    # is installed (the binary looks in its own dir and ../lib otherwise).
    use_cuda_module([exe.parent, exe.parent.parent / "lib"])
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(str(exe), ["pocketllm", *args])
    except OSError as e:
        print(f"pocketllm: cannot run {exe}: {e}", file=sys.stderr)
        return 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
