// Package storeurl opens the executor's object store and cache from URLs, so
// an operator can point deletionctl run (or any embedding) at production
// stores without writing Go:
//
//	objects: s3://BUCKET[/ROOT/][?endpoint=…&region=…&…]   executor/s3store (see s3store.ParseURL)
//	         file:///ABSOLUTE/DIR                           executor.FileObjectStore
//	cache:   redis://, rediss://, redis+cluster://, rediss+cluster://   executor/rediscache (see rediscache.ParseURL)
//	         memory:                                        executor.MemoryCache (empty in a new process)
//
// OpenObjects and OpenCache parse and open in one call; ParseObjects and
// ParseCache return the parsed configuration to adjust first (S3
// credentials, which a URL never carries) and open with Objects.Open and
// Cache.Open. Their String methods give the URL back without a password.
// Every error is an *Error of one bounded line; a parse error matches
// ErrInvalidURL.
//
// Parsing makes no request and reads no environment; opening makes no
// request either (the S3 client reads the AWS SDK's default chain). It is
// the one package that imports both production adapters: importing executor
// alone still pulls in neither the AWS SDK nor go-redis.
package storeurl
