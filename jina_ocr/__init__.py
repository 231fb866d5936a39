"""jina-ocr: tools around the jina-ocr-v1 Transformers remote code.

The model, configuration and processor themselves live in the remote-code modules (installed as
``jina_ocr.remote_code``) because they must also run from a Hub folder where this package is absent.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``jina_ocr.convert`` (from :mod:`jina_ocr.services.conversion`) and ``jina_ocr.load`` (from
    :mod:`jina_ocr.loading`) without importing torch, PyMuPDF and Pillow for every ``import jina_ocr``."""
    if name == "convert":
        from jina_ocr.services.conversion import convert

        return convert
    if name == "load":
        from jina_ocr.loading import load

        return load
    raise AttributeError(f"module 'jina_ocr' has no attribute {name!r}")
