// TODO(in progress this session)
