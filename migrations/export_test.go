package migrations

// LockID is lockID for the tests.
var LockID = lockID
