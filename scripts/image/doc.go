// Command image builds dranode's container images without Docker: the
// agent with the example GPU driver plugin, and the pause and workload
// images a test node runs. The images are reproducible OCI image layouts
// (package images documents what is in each and what reproducible means).
//
// Usage, from anywhere in the repository (-C selects another root; "make
// image" runs build):
//
//	image build [-out DIR] [-tag T] [-arch A] [IMAGE...]   OCI layouts under DIR/<image> (default bin/images)
//	image archive LAYOUT FILE.tar                           an OCI archive "ctr images import" accepts
//	image push LAYOUT REFERENCE                             copy to a registry (default keychain)
//	image digests LAYOUT                                    each plugin's sha256, in the chart's values form
//
// SOURCE_DATE_EPOCH (seconds) dates every timestamp; unset, the images are
// dated the Unix epoch, so the same sources give the same bytes at any
// commit.
package main
