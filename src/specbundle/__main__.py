"""``python -m specbundle``."""

from specbundle.cli import main

main()
