"""The controller runtime: informers, work queues, controllers, leader election and the manager."""
