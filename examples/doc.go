// Package examples holds dranode's example driver plugins and
// configurations: gpu (the gpu-plugin command, a simulated GPU driver) and
// config (the agent configuration section that runs it). The package itself
// is empty; see the README.
package examples
