"""Export parts: each module registers the files one part of the package adds to the Hub folder."""
