"""python -m pocketllm ... runs the pocketllm command-line tool."""
import sys

from .cli import main

sys.exit(main())
