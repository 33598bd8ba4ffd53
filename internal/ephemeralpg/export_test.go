package ephemeralpg

// Internals for the external tests.
var (
	TemplateName = templateName
	FindBinDir   = findBinDir
	StartLocal   = startLocal
	StartURL     = startURL
)
