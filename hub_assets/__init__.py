"""Non-code files of the Hub repository (model card, templates); read by the export."""
