"""Errors that mean "your input is wrong", as opposed to a bug in jina-ocr.

The command line prints these as one line naming the problem instead of a traceback.
"""


class UserError(ValueError):
    """Bad input from the user (a file, an option, a page range): the message says which and why."""
