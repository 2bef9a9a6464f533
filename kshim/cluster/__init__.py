"""What brokers and the controller share: the metadata image and the controller client API."""
