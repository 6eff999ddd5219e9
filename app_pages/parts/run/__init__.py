"""The Run page's parts: its form, the launch, the live view, a finished run, earlier runs, imported traces."""
