"""The thin async client layer over lightkube, plus pure helpers (strategic merge, owner references)."""
