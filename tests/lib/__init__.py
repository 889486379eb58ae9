"""The tests' one fixture library, by noun; its fixtures are re-exported by tests/conftest.py."""
