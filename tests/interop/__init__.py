"""The interop tier: pko and the Go reference operator and agent, paired both ways (a package, so its cluster is
its own)."""
