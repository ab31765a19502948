"""Text tooling: tag schemes (IOB1, IOB2, BIOES) and sparse lexical features."""
