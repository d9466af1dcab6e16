"""Topics restored from the remote store (issue 29, part 4): ``remote.recovery=true`` at creation."""
