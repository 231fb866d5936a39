"""What runs pages through a model: documents rendered lazily into pages, the batch driver, and what a
converted page gives back.

Imports only the model package (the remote-code modules) and :mod:`jina_ocr.errors`; the services
(conversion, server, endpoints) build on it.
"""
