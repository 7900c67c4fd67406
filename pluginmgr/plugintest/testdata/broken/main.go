package main

func main() {
	undefinedOnPurpose()
}
