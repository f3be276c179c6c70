"""rekall: compact a Codex VS Code conversation at a checkpoint, then resume it once."""

__version__ = "0.1.0"
