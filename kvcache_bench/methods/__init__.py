"""The compression methods: config name -> kvpress press, and the retention -> compression-ratio conversion."""
