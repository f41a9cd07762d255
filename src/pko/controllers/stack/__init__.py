"""The Stack controller: from a Stack to a Workspace and Updates, and their results back onto the Stack."""
