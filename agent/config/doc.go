// Package config is the dranode agent's configuration: its keys, how they
// are loaded, and how they are checked.
//
// Every key is declared once, in one table (keys.go): its name in the YAML
// file, its flag, its DRANODE_ environment variable, its type, default and
// checks, and its row in the agent README's table of keys, which
// `go generate` writes from the table and a test compares with it.
//
// Load merges, highest first, the flags that were set (AddFlags registers
// them), DRANODE_ environment variables, the YAML file (--config or
// DRANODE_CONFIG) and Default. A value is decoded the same way from every
// source and never guessed at; an unknown key, file key or variable is an
// error. Validate checks a Config built in code the same way.
//
// Every error is an *Error naming the key (errors.Is(err, ErrInvalid)).
//
// CheckNode and CheckPluginBinaries are `dranode-agent config validate`:
// they check a Config against the machine it would run on (paths, the boot
// ID file, the kubeconfig, the kubelet's checkpoint, the HTTP address, the
// plugin binaries' SHA-256) without creating or changing anything.
package config
