//! `std::io::Read` and `Write` for a stream and for a shared reference to one.

use super::*;

impl Read for RdmaStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_into(&mut [IoSliceMut::new(buf)])
    }
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        self.inner.read_into(bufs)
    }
}

impl Read for &RdmaStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_into(&mut [IoSliceMut::new(buf)])
    }
    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        self.inner.read_into(bufs)
    }
}

impl Write for RdmaStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write_from(&[IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.inner.write_from(bufs)
    }
    /// Data is posted by `write`; nothing is held back.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &RdmaStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write_from(&[IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.inner.write_from(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
