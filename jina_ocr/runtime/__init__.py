"""What runs pages through a model: documents rendered lazily into pages, and the batch driver.

Imports only the model package (the remote-code modules) and :mod:`jina_ocr.errors`; the services
(conversion, server, endpoints) build on it.
"""
