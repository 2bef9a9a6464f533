"""The controller: owns cluster metadata (brokers, topics, assignments, leaders, ISR), persists it
in SQLite, elects leaders and publishes metadata images to the brokers."""
