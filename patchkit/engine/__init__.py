"""The part of patchkit that runs next to the target's files (standard library only)."""
