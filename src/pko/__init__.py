"""pko: the Pulumi Kubernetes Operator, in Python."""

__version__ = "0.1.0"
