// Package inventorytest provides devices and validation cases for tests of
// code that takes an inventory.Inventory: the same cases that hold
// inventory.Validate to its contract in unit tests hold it to a real API
// server in the integration tests, so the two can never drift apart.
package inventorytest
