"""The demo's wrong-argument error: one line on stderr and exit 2, before anything is created."""


class DemoArgumentError(Exception):
    """A wrong argument: said in one line on stderr (what is wrong and the fix), exit 2, nothing
    created or changed."""
