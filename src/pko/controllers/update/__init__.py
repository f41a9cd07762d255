"""The Update controller: runs one Pulumi operation per Update through the workspace agent."""
