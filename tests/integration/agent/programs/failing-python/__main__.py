"""Fails on purpose, with a message the tests look for."""

raise RuntimeError("this program fails on purpose: code 4242")
