"""The cluster tier: a real single-node cluster for this package (a package, so its cluster is torn down before
the next tier that starts one)."""
