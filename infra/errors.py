"""The one error infra raises: a message a person can act on, printed without a stack trace."""


class InfraError(RuntimeError):
    """Something outside Python (java, mvn, a port, a download, a child process) is not as needed."""
