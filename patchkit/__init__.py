"""patchkit: versioned patch series for a patched SGLang, applied all-or-nothing."""

__version__ = "0.1.0"
