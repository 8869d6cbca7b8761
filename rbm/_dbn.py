"""Placeholder: replaced by the model implementation."""


class DBN:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("DBN is not implemented yet")
