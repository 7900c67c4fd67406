package pluginmgr

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/dranode/dranode/pluginmgr/proto/dranode/plugin/v1"
)

// FuzzInventoryFromWire feeds arbitrary bytes where a plugin's inventory
// message would be: decoding must fail cleanly or produce an inventory that
// encodes again.
func FuzzInventoryFromWire(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg pb.Inventory
		if err := proto.Unmarshal(data, &msg); err != nil {
			return
		}
		inv, err := InventoryFromWire(&msg)
		if err != nil {
			return
		}
		if _, err := inventoryToWire(inv); err != nil {
			t.Fatalf("decoded inventory does not encode again: %v", err)
		}
	})
}

// FuzzClaimsFromWire is the plugin side's decoder of Prepare requests.
func FuzzClaimsFromWire(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg pb.PrepareRequest
		if err := proto.Unmarshal(data, &msg); err != nil {
			return
		}
		claims, err := claimsFromWire(msg.GetClaims())
		if err != nil {
			return
		}
		if _, err := claimsToWire(claims); err != nil {
			t.Fatalf("decoded claims do not encode again: %v", err)
		}
	})
}
