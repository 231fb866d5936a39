"""One module per ``jina-ocr`` subcommand (see :mod:`jina_ocr.cli`)."""
