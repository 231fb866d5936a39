"""jina-ocr: tools around the jina-ocr-v1 Transformers remote code.

The model, configuration and processor themselves live in the remote-code modules (installed as
``jina_ocr.remote_code``) because they must also run from a Hub folder where this package is absent.
"""

__version__ = "0.1.0"
