"""The HTTP layer: dependencies, error mapping and one route module per resource."""
