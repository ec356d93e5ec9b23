"""Demo package shipped in the demo payload's pure-Python trees."""
