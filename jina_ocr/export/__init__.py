"""Builds the Hub folder: flattened remote code, config, weights, and every registered part."""
