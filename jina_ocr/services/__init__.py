"""What users call: document conversion, the HTTP server, the endpoints client and safe URL fetching.

Built on :mod:`jina_ocr.runtime` and :mod:`jina_ocr.loading`; the commands build on these.
"""
