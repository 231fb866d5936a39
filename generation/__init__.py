"""Decoding code of the remote model (FastMTP, the loop guard); flattened into the Hub folder on export."""
