package harness

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
)

// PatchConfig merges keys into the agent's configuration file (one level
// deep: a section given replaces the keys it names and keeps the others),
// for configuration AgentOptions does not carry. WriteConfig rewrites the
// file without them; the next Start reads them.
func (a *Agent) PatchConfig(keys map[string]any) error {
	data, err := os.ReadFile(a.ConfigPath)
	if err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("agent config %s: %w", a.ConfigPath, err)
	}
	for k, v := range keys {
		old, isMap := cfg[k].(map[string]any)
		section, givesMap := v.(map[string]any)
		if isMap && givesMap {
			maps.Copy(old, section)
			continue
		}
		cfg[k] = v
	}
	if data, err = json.MarshalIndent(cfg, "", "  "); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	if err := os.WriteFile(a.ConfigPath, data, 0o644); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	return nil
}
