package images

// Registry is the registry part of every image name: the local registry
// host, which no one pulls from, so a node only ever runs the imported image.
const Registry = "localhost"

// Image names, the directory names under [Options].Out.
const (
	Agent    = "dranode-agent"
	Pause    = "pause"
	Workload = "workload"
)

// PluginDir is where the agent image holds driver plugin binaries, the
// directory the Helm chart's drivers[].path point into.
const PluginDir = "/opt/dranode/plugins"

// Names lists every image [Build] knows, in build order.
func Names() []string { return []string{Agent, Pause, Workload} }

// binary is a Go command built into an image.
type binary struct {
	module string // repository directory of the Go module
	pkg    string // package, relative to the module
	path   string // absolute path in the image
}

// layerSpec is one layer: a set of binaries and the extra directories it
// creates.
type layerSpec struct {
	comment  string
	binaries []binary
	dirs     []dir
}

type dir struct {
	path string
	mode int64
}

type imageSpec struct {
	layers     []layerSpec
	entrypoint []string
}

// imageModule is this module's directory in the repository, where the pause
// and workload commands live.
const imageModule = "scripts/image"

var specs = map[string]imageSpec{
	Agent: {
		layers: []layerSpec{
			{
				comment: "dranode-agent and dranodectl",
				binaries: []binary{
					{module: "agent", pkg: "./cmd/dranode-agent", path: "/usr/local/bin/dranode-agent"},
					{module: "tools", pkg: "./cmd/dranodectl", path: "/usr/local/bin/dranodectl"},
				},
				// go-plugin makes each plugin's socket directory in
				// os.TempDir(); an empty base has no /tmp.
				dirs: []dir{{path: "/tmp", mode: 0o1777}},
			},
			{
				comment: "driver plugins",
				binaries: []binary{
					{module: "examples", pkg: "./gpu", path: PluginDir + "/gpu-plugin"},
					{module: "examples", pkg: "./loop/cmd/loop-plugin", path: PluginDir + "/loop-plugin"},
				},
			},
		},
		entrypoint: []string{"/usr/local/bin/dranode-agent"},
	},
	Pause: {
		layers: []layerSpec{{
			comment:  "pause",
			binaries: []binary{{module: imageModule, pkg: "./cmd/pause", path: "/pause"}},
		}},
		entrypoint: []string{"/pause"},
	},
	Workload: {
		layers: []layerSpec{{
			comment:  "workload",
			binaries: []binary{{module: imageModule, pkg: "./cmd/workload", path: "/usr/local/bin/workload"}},
		}},
		entrypoint: []string{"/usr/local/bin/workload"},
	},
}
