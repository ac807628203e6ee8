fn main() {
    println!("cargo::rustc-link-arg-bin=project-worker=-Wl,-z,pack-relative-relocs");
}
