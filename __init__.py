"""The remote code (configuration, modeling, processing, generation), installed as jina_ocr.remote_code.

These files live at the repository root because that is where the Hub folder wants them; this file
only makes the directory an importable package once installed. It is not shipped to the Hub.
"""
