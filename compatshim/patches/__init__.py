"""One module per patched Composer target: ``data_spec`` (``DataSpec.__init__``) and ``trainer`` (its loops)."""
